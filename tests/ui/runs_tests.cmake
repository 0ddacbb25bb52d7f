# runs suites.
