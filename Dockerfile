# MBeacon image. Until the service lands (issue 4) its job is the privacy audit.
# Build: docker build -t mbeacon .   Run: docker run --rm mbeacon   (or: docker run --rm mbeacon audit --json)
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1

RUN useradd --create-home --uid 10001 mbeacon
WORKDIR /app
COPY pyproject.toml README.md ./
COPY mbeacon ./mbeacon
RUN pip install . && rm -rf /root/.cache

USER mbeacon
ENTRYPOINT ["mbeacon"]
CMD ["audit"]
