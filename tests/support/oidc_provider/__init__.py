"""A real OpenID provider for the single sign-on tests: django-oauth-toolkit's, in a Django process
of its own (`serve.py`), configured here (`settings.py`) and driven from the tests (`harness.py`)."""
