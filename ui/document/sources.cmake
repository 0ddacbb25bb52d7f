# document: sources (paths relative to ui/).
target_sources(stagecraft_ui PRIVATE
  document/PlanDocument.h
  document/PlanDocument.cpp
)
