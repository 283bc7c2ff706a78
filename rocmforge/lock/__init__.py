"""The lock wing (see README, "Layout")."""
