# layouts suites: the Find layouts dock against the CLI's search (label ui).
stagecraft_add_test(tst_layouts_view LABEL ui SOURCES tst_layouts_view.cpp LIBS stagecraft::ui)
add_dependencies(tst_layouts_view stagecraft-cli)
