"""Helpers shared by test modules (test modules import no helpers from one another)."""
