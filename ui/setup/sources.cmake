# setup: sources (paths relative to ui/).
target_sources(stagecraft_ui PRIVATE
  setup/SetupPanel.h
  setup/SetupPanel.cpp
)
