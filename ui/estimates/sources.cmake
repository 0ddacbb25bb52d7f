# estimates: sources (paths relative to ui/).
target_sources(stagecraft_ui PRIVATE
  estimates/EstimateCharts.h estimates/EstimateCharts.cpp
  estimates/EstimatesView.h estimates/EstimatesView.cpp)
