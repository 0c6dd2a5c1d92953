"""Settings every test of the workspace shares (pytest loads this before any package's).

Hypothesis: no per-example deadline and no "input generation is slow" health check.
Both measure the machine, not the property: on a loaded 2-core host a test's data
generation or one example can take longer than hypothesis allows by default, and the
test then fails without any counterexample. Every assertion stays as strict; the
number of examples each test asks for is unchanged.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

settings.register_profile("ratatoskr", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ratatoskr")
