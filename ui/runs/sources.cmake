# runs: sources (paths relative to ui/).
