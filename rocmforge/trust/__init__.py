"""The trust wing (see README, "Layout")."""
