"""Talker engine without sockets: pure-Python scheduler + the device-owning model runner."""
from talker_service.engine.config import EngineConfig
from talker_service.engine.engine import TalkerEngine
from talker_service.engine.request import (FINISH_BUDGET, FINISH_CONTEXT, FINISH_EOS, FINISH_LENGTH, EngineError,
                                           ErrorOut, FramesOut)
from talker_service.engine.runner import ModelRunner

__all__ = ["EngineConfig", "EngineError", "ErrorOut", "FINISH_BUDGET", "FINISH_CONTEXT", "FINISH_EOS", "FINISH_LENGTH",
           "FramesOut", "ModelRunner", "TalkerEngine"]
