# scaling: sources (paths relative to ui/).
target_sources(stagecraft_ui PRIVATE
  scaling/ScalingView.h scaling/ScalingView.cpp)
