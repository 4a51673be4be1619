"""The static half of graphcheck: scan source files without running them.

Per file (cached by content hash):
  ``engine.py``        the driver: walks one file once, runs the rule checkers, writes the file's summary
  ``context.py``       what a rule checker sees (``_Ctx``: kind queries, file facts, ``report``)
  ``inference.py``     where each value lives: the device lattice, evaluated per function
  ``classtypes.py``    which class a local or ``self.X`` holds, and the kinds of a class's attributes
  ``descriptors.py``   calls, references, property reads/stores and signatures, as the summary records them
  ``suppressions.py``  ``# graphcheck: ignore[...]`` / ``# noqa: GC...`` comments
  ``regions.py``       which region each line runs in
  ``placement.py``     declared placement (`host-resident`, `host-field-markers` in the config)
Across files:
  ``scanner.py``       `graphcheck scan`: finds the files, runs the engine in parallel through the cache, applies
                       scope and suppressions
  ``scope.py``         ``Program``: the functions reachable from the entry points (``Reach``)
  ``resolve.py``       how a name, an attribute or a call resolves to definitions (``Program``'s ``Resolver`` part)
  ``conditions.py``    whether a finding that depends on callers or callees holds (its ``Conditions`` part)
  ``gitignore.py``     which files a directory scan skips
"""
