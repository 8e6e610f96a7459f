"""Evidence and its judgement.

What a run records, the rules that judge it, the receipt that binds it. The vocabulary
(:mod:`.gates`, :mod:`.identities`, :mod:`.records`, :mod:`.layout`) is shared by every
writer and reader; :mod:`.schemas` types the documents; :mod:`.rules` holds every
pass rule, one module per stage; :mod:`.receipt`, :mod:`.accounting` and :mod:`.attest` are
the validator's side; :mod:`.results` and :mod:`.runs` read a run back as typed results.
"""
