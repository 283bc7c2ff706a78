"""The pipeline wing (see README, "Layout")."""
