"""`python -m vocoder_service` (see vocoder_service/main.py for the flags)."""
from vocoder_service.main import main

raise SystemExit(main())
