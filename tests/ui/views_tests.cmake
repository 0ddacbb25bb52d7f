# views suites: topology, stage editor, estimates, schedule (label ui).
stagecraft_add_test(tst_topology_scene LABEL ui SOURCES tst_topology_scene.cpp views_test_plans.h LIBS stagecraft::ui)
stagecraft_add_test(tst_stage_editor LABEL ui SOURCES tst_stage_editor.cpp views_test_plans.h LIBS stagecraft::ui)
stagecraft_add_test(tst_estimates_view LABEL ui SOURCES tst_estimates_view.cpp views_test_plans.h LIBS stagecraft::ui)
stagecraft_add_test(tst_schedule_view LABEL ui SOURCES tst_schedule_view.cpp views_test_plans.h LIBS stagecraft::ui)
