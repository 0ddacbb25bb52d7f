# runs suites: the runs view, its expert heat map, its timeline tab and calibrate dialog, the hosts editor, the launch
# dialog (label ui; the launch dialog starts real runs: integration).
stagecraft_add_test(tst_runs_view LABEL ui SOURCES tst_runs_view.cpp LIBS stagecraft::ui SQLite::SQLite3)
stagecraft_add_test(tst_expert_load_map LABEL ui SOURCES tst_expert_load_map.cpp LIBS stagecraft::ui)
stagecraft_add_test(tst_run_timeline_view LABEL ui SOURCES tst_run_timeline_view.cpp run_timing_support.h LIBS stagecraft::ui)
stagecraft_add_test(tst_calibrate_dialog LABEL ui SOURCES tst_calibrate_dialog.cpp run_timing_support.h LIBS stagecraft::ui)
stagecraft_add_test(tst_hosts_editor LABEL ui SOURCES tst_hosts_editor.cpp runs_test_support.h LIBS stagecraft::ui)
stagecraft_add_test(tst_launch_dialog LABEL integration SOURCES tst_launch_dialog.cpp runs_test_support.h LIBS stagecraft::ui TIMEOUT 600)
add_dependencies(tst_launch_dialog stagecraft-cli stagecraft-worker)
