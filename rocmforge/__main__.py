"""Allow ``python -m rocmforge``."""

from rocmforge.console import main_entry

main_entry()
