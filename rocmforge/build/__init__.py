"""The build wing (see README, "Layout")."""
