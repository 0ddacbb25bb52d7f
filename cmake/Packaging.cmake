# Debian packages with CPack (app/package.sh runs it): `stagecraft` from the `app` component,
# `stagecraft-worker` from the `worker` component, their library dependencies computed from the
# binaries by dpkg-shlibdeps. Install rules: app/CMakeLists.txt.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME stagecraft)
set(CPACK_PACKAGE_VENDOR "Stagecraft")
set(CPACK_PACKAGE_CONTACT "Stagecraft maintainers <maintainers@stagecraft.io>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL app worker)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://stagecraft.io")
set(CPACK_DEBIAN_APP_PACKAGE_NAME stagecraft)
set(CPACK_DEBIAN_WORKER_PACKAGE_NAME stagecraft-worker)
set(CPACK_DEBIAN_APP_PACKAGE_DEPENDS "stagecraft-worker (= ${PROJECT_VERSION})")
# First line: the synopsis; CPack indents the rest and marks the empty line as a paragraph break.
set(CPACK_DEBIAN_APP_DESCRIPTION "plan and run hybrid-parallel training of transformer models
Stagecraft draws which GPU ranks form every tensor, data and pipeline
parallel group and which layers sit on which pipeline stage, predicts the
memory of every GPU and the time of every step, searches every layout for
the fastest that fits, and exports the plan for LiBai, PaddlePaddle,
Colossal-AI, Megatron-LM and DeepSpeed. It trains the plan with its own
engine on this machine or on remote nodes over SSH, or launches another
framework's program with the same layout, and keeps every run in a SQLite
history.

This package holds the desktop application, stagecraft-cli and the
examples.")
set(CPACK_DEBIAN_WORKER_DESCRIPTION "one training rank of a Stagecraft run
The worker program that stagecraft-cli starts once per rank, locally or on
remote nodes over SSH. It needs no Qt, libssh or SQLite: install it alone
on the nodes that train.")
include(CPack)
