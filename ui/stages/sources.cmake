# stages: sources (paths relative to ui/).
target_sources(stagecraft_ui PRIVATE
  stages/StageBars.h stages/StageBars.cpp
  stages/StageEditor.h stages/StageEditor.cpp
  stages/StageStrip.h stages/StageStrip.cpp)
