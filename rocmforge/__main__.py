"""Allow ``python -m rocmforge``."""

from rocmforge.entry import main_entry

main_entry()
