"""Client side of Signet Continuity: hook scripts and installers run on the agent's machine."""
