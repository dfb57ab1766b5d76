"""Benchmarks of the product against the raw engine (docs/benchmarks.md).

Run each as `python -m bench.<name>` from the repository root, or all with `make bench`.
They use the product's settings and database, so Django is set up once here.
"""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatsite.settings")
django.setup()
