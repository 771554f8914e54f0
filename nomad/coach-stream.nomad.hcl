# coach_stream: one training run (trainer, N rollout workers, evaluator) as a Nomad job.
#
# The same job as `coach-stream launch PRESET --orchestrator nomad` registers (a test keeps
# them in agreement). Run it by hand:
#
#   nomad job run -var run_id=cartpole-1 -var kafka=kafka.internal:9092 \
#     -var checkpoints=gs://my-bucket/runs nomad/coach-stream.nomad.hcl
#
# Credentials never go in here: put them in a Nomad Variable
# (`nomad var put nomad/jobs/coach-stream-cartpole-1 GOOGLE_APPLICATION_CREDENTIALS=...`)
# and pass -var secrets_var=nomad/jobs/coach-stream-cartpole-1; every item becomes an
# environment variable of every task. See nomad/README.md and docs/nomad.md.

variable "run_id" {
  type        = string
  description = "The run id: names the job, the Kafka topics and the checkpoint prefix."
}

variable "preset" {
  type    = string
  default = "cartpole-ppo"
}

variable "workers" {
  type    = number
  default = 2
}

variable "kafka" {
  type        = string
  description = "Kafka bootstrap servers as the nodes reach them."
}

variable "checkpoints" {
  type        = string
  description = "gs://bucket/prefix (or file:///dir on a shared filesystem)."
}

variable "gcs_emulator" {
  type        = string
  default     = ""
  description = "A GCS emulator's address (tests); empty for real GCS."
}

variable "python" {
  type        = string
  default     = "python3"
  description = "The interpreter with coach_stream installed, on the node (raw_exec/exec) or in the image (docker)."
}

variable "driver" {
  type    = string
  default = "raw_exec"
}

variable "datacenters" {
  type    = list(string)
  default = ["*"]
}

variable "secrets_var" {
  type        = string
  default     = ""
  description = "A Nomad Variable path whose items become the tasks' environment; empty for none."
}

job "coach-stream" {
  id          = "coach-stream-${var.run_id}"
  name        = "coach-stream-${var.run_id}"
  type        = "batch"
  datacenters = var.datacenters
  priority    = 50

  meta {
    run_id     = var.run_id
    preset     = var.preset
    managed_by = "coach-stream"
  }

  group "trainer" {
    count = 1

    meta {
      role = "trainer"
    }

    restart {
      attempts = 5
      interval = "600s"
      delay    = "1s"
      mode     = "fail"
    }

    reschedule {
      attempts       = 3
      interval       = "3600s"
      delay          = "5s"
      delay_function = "exponential"
      max_delay      = "120s"
      unlimited      = false
    }

    task "trainer" {
      driver = var.driver

      config {
        command = var.python
        args = ["-m", "coach_stream.cli.main", "train", "--preset", var.preset, "--run-id", var.run_id,
        "--kafka", var.kafka, "--checkpoints", var.checkpoints, "--workers", "${var.workers}"]
      }

      env {
        KAFKA_BOOTSTRAP_SERVERS = var.kafka
        STORAGE_EMULATOR_HOST   = var.gcs_emulator
        PYTHONUNBUFFERED        = "1"
      }

      resources {
        cpu    = 1000
        memory = 2048
        # A GPU trainer: uncomment (needs the nvidia device plugin on the node).
        # device "nvidia/gpu" {
        #   count = 1
        # }
      }

      kill_signal  = "SIGTERM"
      kill_timeout = "20s"

      logs {
        max_files     = 5
        max_file_size = 20
      }

      dynamic "template" {
        for_each = var.secrets_var == "" ? [] : [var.secrets_var]
        content {
          data        = "{{ with nomadVar \"${template.value}\" }}{{ range $k, $v := . }}{{ $k }}={{ $v }}\n{{ end }}{{ end }}"
          destination = "secrets/coach-stream.env"
          env         = true
        }
      }
    }
  }

  group "rollout" {
    count = var.workers

    meta {
      role = "rollout"
    }

    restart {
      attempts = 5
      interval = "600s"
      delay    = "1s"
      mode     = "fail"
    }

    reschedule {
      attempts       = 3
      interval       = "3600s"
      delay          = "5s"
      delay_function = "exponential"
      max_delay      = "120s"
      unlimited      = false
    }

    task "rollout" {
      driver = var.driver

      config {
        command = var.python
        args = ["-m", "coach_stream.cli.main", "rollout", "--preset", var.preset, "--run-id", var.run_id,
        "--kafka", var.kafka, "--checkpoints", var.checkpoints, "--worker-id", "${NOMAD_ALLOC_INDEX}"]
      }

      env {
        KAFKA_BOOTSTRAP_SERVERS = var.kafka
        STORAGE_EMULATOR_HOST   = var.gcs_emulator
        OMP_NUM_THREADS         = "1"
        MKL_NUM_THREADS         = "1"
        PYTHONUNBUFFERED        = "1"
      }

      resources {
        cpu    = 500
        memory = 1024
      }

      kill_signal  = "SIGTERM"
      kill_timeout = "20s"

      logs {
        max_files     = 5
        max_file_size = 20
      }

      dynamic "template" {
        for_each = var.secrets_var == "" ? [] : [var.secrets_var]
        content {
          data        = "{{ with nomadVar \"${template.value}\" }}{{ range $k, $v := . }}{{ $k }}={{ $v }}\n{{ end }}{{ end }}"
          destination = "secrets/coach-stream.env"
          env         = true
        }
      }
    }

    # One rollout allocation per node where possible.
    spread {
      attribute = "${node.unique.id}"
      weight    = 100
    }

    # `coach-stream scale RUN --workers N` changes the count within these bounds.
    scaling {
      min     = 1
      max     = 256
      enabled = false
    }
  }

  group "evaluator" {
    count = 1

    meta {
      role = "evaluator"
    }

    restart {
      attempts = 5
      interval = "600s"
      delay    = "1s"
      mode     = "fail"
    }

    reschedule {
      attempts       = 3
      interval       = "3600s"
      delay          = "5s"
      delay_function = "exponential"
      max_delay      = "120s"
      unlimited      = false
    }

    task "evaluator" {
      driver = var.driver

      config {
        command = var.python
        # The evaluator's worker id follows the workers' so that its seeds differ.
        args = ["-m", "coach_stream.cli.main", "rollout", "--preset", var.preset, "--run-id", var.run_id,
        "--kafka", var.kafka, "--checkpoints", var.checkpoints, "--worker-id", "${var.workers}", "--evaluator"]
      }

      env {
        KAFKA_BOOTSTRAP_SERVERS = var.kafka
        STORAGE_EMULATOR_HOST   = var.gcs_emulator
        OMP_NUM_THREADS         = "1"
        MKL_NUM_THREADS         = "1"
        PYTHONUNBUFFERED        = "1"
      }

      resources {
        cpu    = 500
        memory = 1024
      }

      kill_signal  = "SIGTERM"
      kill_timeout = "20s"

      logs {
        max_files     = 5
        max_file_size = 20
      }

      dynamic "template" {
        for_each = var.secrets_var == "" ? [] : [var.secrets_var]
        content {
          data        = "{{ with nomadVar \"${template.value}\" }}{{ range $k, $v := . }}{{ $k }}={{ $v }}\n{{ end }}{{ end }}"
          destination = "secrets/coach-stream.env"
          env         = true
        }
      }
    }
  }
}
