"""The one exception root of verifylib, and one leaf per failure family.

Every exception verifylib raises on purpose derives from :class:`VerifylibError`, so a
caller (the CLI, a notebook, a batch driver) can tell "verifylib refused or could not do
this, and says why" from a bug in verifylib or a library it calls. Each family also keeps
the built-in base its callers already catch (``ValueError`` for bad input, ``RuntimeError``
for a failed operation), so narrowing an ``except`` clause is never required.

Modules define their specific exceptions as subclasses of these leaves (for example
``verifylib.whispercpp.cmake_steps.BuildError`` derives from :class:`BuildFailure`);
the leaves here name the family, the module classes name the place (a host fault keeps
``OSError``, the base a disk's errors already have). A check that catches
verifylib calling itself wrongly (a stage beginning another stage's gate, a PASS citing
evidence its rule never read) raises a built-in exception instead: that is a bug, not a refusal.

Two cases matter to the gate statuses:

* :class:`PrerequisiteBroken` — something an earlier stage published and a gate passed on
  no longer holds (a binary that no longer hashes to its recorded digest, a cache folder
  whose tree id changed). The gate is recorded ERROR with reason kind
  ``"prerequisite-broken"``: the run's environment changed under it, not the harness.
* any other exception inside a gate — taken as a harness bug, recorded ERROR with reason kind
  ``"exception"``.

Both cite the stored traceback.

A :class:`HostFault` (the host's disk is full, read-only or failing) is neither: it is
never recorded as a gate's status, it stops the audit (see
:mod:`verifylib.runtime.host_faults`).
"""

from __future__ import annotations

__all__ = [
    "VerifylibError", "ParametersInvalid", "SourceFailure", "BuildFailure",
    "ContractBroken", "ExportFailure", "EvidenceInvalid", "PrerequisiteBroken",
    "RunFailure", "ModelFailure", "PolicyInvalid", "AttestationFailure", "StageRefusal",
    "HostFault",
]


class VerifylibError(Exception):
    """Root of every exception verifylib raises on purpose."""


class ParametersInvalid(VerifylibError, ValueError):
    """Bad input: a parameter file, a fixture, a key, a command-line value, an argument."""


class SourceFailure(VerifylibError, RuntimeError):
    """The pinned whisper.cpp source could not be obtained, identified or patched."""


class BuildFailure(VerifylibError, RuntimeError):
    """A whisper.cpp build (cmake, compiler, coremlc) did not produce what it must."""


class ContractBroken(VerifylibError, ValueError):
    """Something breaks the runtime or IO contract (markers, flags, paths, shapes)."""


class ExportFailure(VerifylibError, RuntimeError):
    """Converting, executing, compiling or reading the plan of the Core ML encoder failed."""


class EvidenceInvalid(VerifylibError, ValueError):
    """Stored evidence, a ledger, a receipt or an attestation is malformed or does not verify."""


class PrerequisiteBroken(VerifylibError, RuntimeError):
    """What an earlier stage published, and a gate passed on, no longer holds."""


class RunFailure(VerifylibError, RuntimeError):
    """A child process could not be launched, did not succeed, or was refused by a guard."""


class ModelFailure(VerifylibError, RuntimeError):
    """A model could not be obtained, read, converted or written."""


class PolicyInvalid(VerifylibError, ValueError):
    """A packaged policy (WER, parity) is missing or malformed."""


class AttestationFailure(VerifylibError, RuntimeError):
    """Signing or checking an attestation failed."""


class StageRefusal(VerifylibError, RuntimeError):
    """A stage refuses to run: it would replace evidence or touch a published run."""


class HostFault(VerifylibError, OSError):
    """The host failed a write or a read the audit needs (a full, read-only or failing disk).

    Never a gate's status: the audit stops, publishes nothing, and exits 3.
    """
