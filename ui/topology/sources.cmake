# topology: sources (paths relative to ui/).
target_sources(stagecraft_ui PRIVATE
  topology/TopologyItems.h topology/TopologyItems.cpp
  topology/TopologyScene.h topology/TopologyScene.cpp
  topology/TopologyView.h topology/TopologyView.cpp)
