import os

from hypothesis import HealthCheck, settings

# CI runs on 2 cores: keep property runs bounded but meaningful; `HYPOTHESIS_PROFILE=deep`
# for a longer local hunt.
# derandomize: CI draws the same examples on every run, so main is red only for a real change;
# the deep profile (random, 2000 examples) is the one that hunts for new counterexamples.
settings.register_profile(
    "ci", max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
settings.register_profile(
    "deep", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
