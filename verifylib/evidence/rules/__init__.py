"""Every pass rule, one module per stage, and the registry beside them (:mod:`.registry`).

A rule is a pure judge of stored evidence: it reads only the evidence view it is given and
what this version ships (the packaged policies, the pin manifest, the runtime contract).
The same function judges a gate at run time and again in ``verifylib verify``.
"""
