# document suites: PlanDocument, the setup form, the main window (label ui; the one that trains
# is integration).
stagecraft_add_test(tst_plan_document LABEL ui SOURCES tst_plan_document.cpp LIBS stagecraft::ui)
stagecraft_add_test(tst_setup_panel LABEL ui SOURCES tst_setup_panel.cpp LIBS stagecraft::ui)
stagecraft_add_test(tst_main_window LABEL ui SOURCES tst_main_window.cpp LIBS stagecraft::ui)
add_dependencies(tst_main_window stagecraft)
stagecraft_add_test(tst_run_locally LABEL integration SOURCES tst_run_locally.cpp LIBS stagecraft::ui TIMEOUT 600)
add_dependencies(tst_run_locally stagecraft-worker)
