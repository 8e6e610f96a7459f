"""Launching whisper.cpp: runtime contract, subprocess runner, launch ledger, host capabilities."""
