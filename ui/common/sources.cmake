# common: helpers every view shares (paths relative to ui/).
target_sources(stagecraft_ui PRIVATE
  common/ImageExport.h common/ImageExport.cpp
  common/StageColors.h common/StageColors.cpp
  common/Text.h)
