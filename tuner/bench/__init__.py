"""The implementations of ``tilewise bench``, outside the product's core: only the command line
imports this package (see the import layers in pyproject.toml). The search benchmark's
statistics live with the search (``tilewise.search._bench``); each op's baselines live beside
its spec (``OpSpec.baselines``)."""
