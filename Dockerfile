# The coach_stream worker image for Nomad's docker driver:
#   docker build -t registry.example/coach-stream:0.1.0 .
#   coach-stream launch cartpole-ppo --orchestrator nomad --driver docker \
#     --image registry.example/coach-stream:0.1.0 --python python
# Every task (trainer, rollout workers, evaluator) runs `python -m coach_stream.cli.main ...`
# from this image; Kafka and GCS are reached over the network (their addresses are flags
# and environment variables of the job, credentials come from Nomad Variables).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1

# swig and a compiler build box2d (gymnasium[box2d], for lunarlander-ppo); librdkafka comes
# in confluent-kafka's wheel.
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential swig \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/coach-stream
COPY pyproject.toml README.md ./
COPY schemas ./schemas
COPY coach_stream ./coach_stream
# The package's schemas/ is a link to the top-level folder; in the image it is the folder.
RUN rm -f coach_stream/schemas && cp -r schemas coach_stream/schemas \
    && pip install --extra-index-url https://download.pytorch.org/whl/cpu . \
    && apt-get purge -y build-essential swig && apt-get autoremove -y

RUN useradd --create-home --uid 10001 coach
USER coach
WORKDIR /home/coach
ENTRYPOINT []
CMD ["python", "-m", "coach_stream.cli.main", "--help"]
