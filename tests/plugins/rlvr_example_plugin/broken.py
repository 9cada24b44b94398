"""A plugin module whose own dependency is not installed (for the missing-package error)."""

import rlvr_package_that_is_not_installed  # noqa: F401


class NeedsMissingPackage:
    pass
