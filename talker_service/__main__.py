"""`python -m talker_service` (see talker_service/main.py for the flags)."""
from talker_service.main import main

raise SystemExit(main())
