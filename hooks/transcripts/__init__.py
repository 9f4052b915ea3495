"""Readers that pull recovery facts out of coding-agent transcripts (pure standard library)."""
