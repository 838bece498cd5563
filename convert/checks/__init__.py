"""The checks of an artifact, each a module with its worker job and the report detail it records (``base``: what a check
is given). The validation stage (convert/pipeline/validate.py) runs the registered checks that apply to an artifact,
in this order within each phase: the comparison with the source, the repair of declared shapes (which compares again),
precision attestation and the chain while the artifact is validated; localisation and sensitivity once a failing one
is published."""

from convert.registry import ANY_FORMAT, CORE_EXTRA, REGISTRY, CheckSpec

_DETAILS = "convert.reports.details"

for _spec in (
    CheckSpec(
        name="comparison",
        target="convert.checks.comparison:compare",
        formats=(ANY_FORMAT,),
        phase="validate",
        detail=None,
        cacheable=False,
        packages=(),
        extra=CORE_EXTRA,
    ),
    CheckSpec(
        name="repair",
        target="convert.checks.repair:repair",
        formats=(ANY_FORMAT,),
        phase="validate",
        detail=None,
        cacheable=False,
        packages=(),
        extra=CORE_EXTRA,
    ),
    CheckSpec(
        name="attestation",
        target="convert.checks.attestation:attest",
        formats=(ANY_FORMAT,),
        phase="validate",
        detail=f"{_DETAILS}:PrecisionAttestation",
        cacheable=False,
        packages=(),
        extra=CORE_EXTRA,
    ),
    CheckSpec(
        name="chain",
        target="convert.checks.chain:chain",
        formats=(ANY_FORMAT,),
        phase="validate",
        detail=f"{_DETAILS}:ChainLinks",
        cacheable=False,
        packages=(),
        extra=CORE_EXTRA,
    ),
    CheckSpec(
        name="localisation",
        target="convert.checks.localize:localize",
        formats=(ANY_FORMAT,),
        phase="diagnose",
        detail=f"{_DETAILS}:Divergence",
        cacheable=False,
        packages=(),
        extra=CORE_EXTRA,
    ),
    CheckSpec(
        name="sensitivity",
        target="convert.checks.sensitivity:sensitivity",
        formats=(ANY_FORMAT,),
        phase="diagnose",
        detail=f"{_DETAILS}:Sensitivity",
        cacheable=False,
        packages=(),
        extra=CORE_EXTRA,
    ),
):
    REGISTRY.add(_spec)
