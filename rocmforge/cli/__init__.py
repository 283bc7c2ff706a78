"""The cli wing (see README, "Layout")."""
