# schedule: sources (paths relative to ui/).
target_sources(stagecraft_ui PRIVATE
  schedule/ScheduleTimeline.h schedule/ScheduleTimeline.cpp
  schedule/ScheduleTimelineItem.h schedule/ScheduleTimelineItem.cpp
  schedule/ScheduleView.h schedule/ScheduleView.cpp)
