# layouts: sources (paths relative to ui/).
target_sources(stagecraft_ui PRIVATE
  layouts/LayoutSearch.h layouts/LayoutSearch.cpp
  layouts/LayoutsModel.h layouts/LayoutsModel.cpp
  layouts/LayoutsChart.h layouts/LayoutsChart.cpp
  layouts/LayoutsView.h layouts/LayoutsView.cpp)
