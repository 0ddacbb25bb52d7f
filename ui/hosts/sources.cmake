# hosts: sources (paths relative to ui/).
