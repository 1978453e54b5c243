"""The plugin's distribution name, and the name it had through release 0.1.0.

Through 0.1.0 the plugin was built as `netbox-proxbox`, which on PyPI is another project
(upstream Proxbox, with the same import name and app label): `pip install netbox-proxbox`
fetched that one. The distribution is now `netbox-proxbox-platform`; the import package
and app label stay `netbox_proxbox`, and `foreign_history` refuses a database that ran
upstream's migrations.

Released migration code never changes (`released-migrations.sha256`), and the 0.1.0
schema validator asks importlib.metadata for `netbox-proxbox` to print the installed
version in its marker. `LegacyNameFinder` answers that one name with this distribution,
through importlib.metadata's own extension point (a finder on `sys.meta_path`), and only
after every other finder: a distribution that really is named `netbox-proxbox` on the
path is found first.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata

DISTRIBUTION = "netbox-proxbox-platform"
LEGACY_DISTRIBUTION = "netbox-proxbox"


def normalized(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


class LegacyNameFinder(metadata.DistributionFinder):
    """Finds this distribution when asked for LEGACY_DISTRIBUTION, and nothing else (a
    listing of every distribution does not see it twice)."""

    def find_spec(self, fullname, path=None, target=None):
        return None  # a metadata finder only: it never imports modules

    def find_distributions(self, context=None):
        context = context or metadata.DistributionFinder.Context()
        if context.name is None or normalized(context.name) != LEGACY_DISTRIBUTION:
            return iter(())
        return iter(metadata.distributions(name=DISTRIBUTION, path=context.path))


def answer_legacy_name() -> None:
    """Put LegacyNameFinder last on sys.meta_path, once."""
    if not any(isinstance(finder, LegacyNameFinder) for finder in sys.meta_path):
        sys.meta_path.append(LegacyNameFinder())
