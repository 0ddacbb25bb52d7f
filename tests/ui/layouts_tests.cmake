# layouts suites: the Find layouts dock and the scaling view against the CLI (label ui).
stagecraft_add_test(tst_layouts_view LABEL ui SOURCES tst_layouts_view.cpp LIBS stagecraft::ui)
add_dependencies(tst_layouts_view stagecraft-cli)
stagecraft_add_test(tst_scaling_view LABEL ui SOURCES tst_scaling_view.cpp LIBS stagecraft::ui)
add_dependencies(tst_scaling_view stagecraft-cli)
