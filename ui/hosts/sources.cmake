# hosts: sources (paths relative to ui/).
target_sources(stagecraft_ui PRIVATE
  hosts/SshConfigHosts.h
  hosts/SshConfigHosts.cpp
  hosts/PreflightRunner.h
  hosts/PreflightRunner.cpp
  hosts/PreflightTable.h
  hosts/PreflightTable.cpp
  hosts/HostsEditor.h
  hosts/HostsEditor.cpp
)
