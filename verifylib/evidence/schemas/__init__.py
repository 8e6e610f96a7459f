"""Typed schemas of the evidence documents the stages write.

One module per stage; each document is a frozen dataclass with a strict ``from_json``
(a missing or wrongly typed field raises :class:`verifylib.errors.EvidenceInvalid` naming
the field path) and a ``to_json`` giving back exactly the dict the stage writes.
"""
