"""Allow ``python -m rocmforge``."""

from rocmforge.cli import main_entry

main_entry()
