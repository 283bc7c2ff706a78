"""The wheel wing (see README, "Layout")."""
