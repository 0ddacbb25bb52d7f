# runs: sources (paths relative to ui/).
target_sources(stagecraft_ui PRIVATE
  runs/RunsModel.h
  runs/RunsModel.cpp
  runs/RunCharts.h
  runs/RunCharts.cpp
  runs/RankStateGrid.h
  runs/RankStateGrid.cpp
  runs/ExpertLoadMap.h
  runs/ExpertLoadMap.cpp
  runs/RunLogView.h
  runs/RunLogView.cpp
  runs/RunsView.h
  runs/RunsView.cpp
  runs/LaunchDialog.h
  runs/LaunchDialog.cpp
  runs/RunLocallyDialog.h
  runs/RunLocallyDialog.cpp
  runs/RunManager.h
  runs/RunManager.cpp
  runs/RecordedRunPlan.h
  runs/RecordedRunPlan.cpp
  runs/RunTimelineView.h
  runs/RunTimelineView.cpp
  runs/CalibrateDialog.h
  runs/CalibrateDialog.cpp
)
