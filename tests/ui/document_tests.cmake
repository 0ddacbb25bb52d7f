# document suites: PlanDocument, the setup form, the main window (label ui; the one that trains
# is integration).
stagecraft_add_test(tst_plan_document LABEL ui SOURCES tst_plan_document.cpp LIBS stagecraft::ui)
stagecraft_add_test(tst_setup_panel LABEL ui SOURCES tst_setup_panel.cpp LIBS stagecraft::ui)
