"""The talker's gRPC side port: grpc.health.v1, server reflection, and tts.internal.v1.TalkerAdmin.

The servicer converts protobuf <-> engine inputs (tokenizing GenerateCodes text here, off the
loop thread) and hands the work to the loop through `AdminJobs`. Health is NOT_SERVING until the
model is loaded (the caller flips it) and again from the start of shutdown.
"""
from __future__ import annotations

import queue

import grpc

from protos.tts.internal.v1 import admin_pb2, admin_pb2_grpc
from protos.tts.v1 import config_pb2
from service_common.side_port import SidePortServer
from talker_service.engine import ErrorOut, FramesOut
from talker_service.model import SamplingParams
from talker_service.prompt import (DEFAULT_NON_STREAMING_MODE, PromptRequest, new_text_feed, tokenize_instruct,
                                   tokenize_target)
from talker_service.server.admin_jobs import AdminJobs, JobsClosed
from talker_service.server.summary import summary_of

ADMIN_SERVICE = admin_pb2.DESCRIPTOR.services_by_name["TalkerAdmin"].full_name
_SAMPLING_FIELDS = {"seed": "seed", "do_sample": "do_sample", "temperature": "temperature", "top_k": "top_k",
                    "top_p": "top_p", "repetition_penalty": "repetition_penalty",
                    "subtalker_do_sample": "subtalker_dosample", "subtalker_temperature": "subtalker_temperature",
                    "subtalker_top_k": "subtalker_top_k", "subtalker_top_p": "subtalker_top_p"}


class TalkerAdminServicer(admin_pb2_grpc.TalkerAdminServicer):
    def __init__(self, jobs: AdminJobs, timeout_s: float) -> None:
        self.jobs = jobs
        self.timeout_s = timeout_s
        self.model = None   # (vocab, tokenizer, generation_config, max_text_tokens) once loaded

    def bind_model(self, vocab, tokenizer, generation_config: dict, max_text_tokens: int) -> None:
        self.model = (vocab, tokenizer, generation_config, max_text_tokens)

    def _submit(self, context, kind: str, payload) -> queue.Queue:
        if self.model is None:
            context.abort(grpc.StatusCode.UNAVAILABLE, "the talker is still loading its model")
        try:
            return self.jobs.submit(kind, payload)
        except queue.Full:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "too many admin calls in flight; retry later")
        except JobsClosed as exc:
            context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))

    def _next(self, context, replies: queue.Queue):
        try:
            reply = replies.get(timeout=self.timeout_s)
        except queue.Empty:
            context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, f"no progress within {self.timeout_s:.1f} s")
        if isinstance(reply, ErrorOut):
            context.abort(getattr(grpc.StatusCode, reply.code, grpc.StatusCode.UNKNOWN), reply.message)
        if isinstance(reply, Exception):
            context.abort(grpc.StatusCode.UNAVAILABLE if isinstance(reply, JobsClosed) else grpc.StatusCode.INTERNAL,
                          str(reply))
        return reply

    def GetStats(self, request: admin_pb2.GetStatsRequest, context) -> admin_pb2.TalkerStats:
        return self._next(context, self._submit(context, "stats", request.reset))

    def GenerateCodes(self, request: admin_pb2.GenerateCodesRequest, context):
        if self.model is None:
            context.abort(grpc.StatusCode.UNAVAILABLE, "the talker is still loading its model")
        try:
            payload = self._inputs(request)
        except ValueError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        replies = self._submit(context, "generate", payload)
        context.add_callback(lambda: self.jobs.is_closed or self.jobs.submit("cancel", replies))
        while True:
            out: FramesOut = self._next(context, replies)
            response = admin_pb2.GenerateCodesResponse(codes=out.codes.reshape(-1).tolist(),
                                                       num_frames=out.codes.shape[0],
                                                       first_frame_index=out.first_frame_index, is_final=out.is_final)
            if out.is_final:
                response.generation.CopyFrom(summary_of(out))
                response.seed = payload[2].seed
                yield response
                return
            yield response

    def _inputs(self, request: admin_pb2.GenerateCodesRequest):
        vocab, tokenizer, generation_config, max_text_tokens = self.model
        config = request.config
        voice = config.WhichOneof("voice")
        speaker, instruct_ids = None, None
        if voice == "speaker":
            speaker = config.speaker.name
            instruct_ids = tokenize_instruct(tokenizer, config.speaker.instruct) if config.speaker.instruct else None
        elif voice == "design":
            instruct_ids = tokenize_instruct(tokenizer, config.design.instruct) if config.design.instruct else None
        elif voice is not None:
            raise ValueError(f"config.{voice} is not supported by GenerateCodes (clone voices go through a gateway)")
        if config.text_mode == config_pb2.TEXT_MODE_UNSPECIFIED:
            non_streaming = DEFAULT_NON_STREAMING_MODE[vocab.model_type]
        else:
            non_streaming = config.text_mode == config_pb2.TEXT_MODE_NON_STREAMING
        target = tokenize_target(tokenizer, request.text, expected_role_ids=vocab.role_ids)
        prompt = PromptRequest(language=config.language or "auto", speaker=speaker, instruct_ids=instruct_ids,
                               non_streaming_mode=non_streaming, role_ids=target.role_ids)
        feed = new_text_feed(vocab, prompt, max_text_tokens=max_text_tokens)
        feed.push(target.text_ids)
        feed.close()
        s = config.sampling
        overrides = {ours: getattr(s, theirs) for theirs, ours in _SAMPLING_FIELDS.items() if s.HasField(theirs)}
        if s.HasField("max_frames"):
            overrides["max_new_tokens"] = s.max_frames + 1
        if s.HasField("min_frames"):
            overrides["min_new_tokens"] = s.min_frames
        params = SamplingParams.from_generation_config(generation_config, **overrides)
        if s.HasField("min_frames") and params.min_new_tokens >= params.max_new_tokens:
            raise ValueError(f"config.sampling.min_frames {s.min_frames} exceeds max_frames "
                             f"{params.max_new_tokens - 1}")
        return prompt, feed, params


def side_port(host: str, port: int, servicer: TalkerAdminServicer) -> SidePortServer:
    """The side-port server (not started) with health, reflection and TalkerAdmin."""
    return SidePortServer(host, port, ADMIN_SERVICE, admin_pb2_grpc.add_TalkerAdminServicer_to_server, servicer,
                          thread_name_prefix="talker-grpc")
