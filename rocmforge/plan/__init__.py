"""The plan wing (see README, "Layout")."""
