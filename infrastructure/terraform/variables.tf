variable "project_id" {
  description = "Google Cloud project that holds the VM, its service account and the output bucket."
  type        = string
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{4,28}[a-z0-9]$", var.project_id))
    error_message = "project_id must be a Google Cloud project ID: 6 to 30 lower case letters, digits and hyphens, starting with a letter (it reaches the VM's startup script)."
  }
}

variable "region" {
  description = "Region of the output bucket (and the provider default)."
  type        = string
  default     = "us-central1"
}

variable "zone" {
  description = "Zone of the VM; it must offer the GPU type (gcloud compute accelerator-types list)."
  type        = string
  default     = "us-central1-a"
}

variable "name" {
  description = "Name of the VM and prefix of the run's objects in the bucket."
  type        = string
  default     = "rlvr-run"
  validation {
    condition     = can(regex("^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$", var.name))
    error_message = "name must be a valid Compute Engine instance name (lower case letters, digits, hyphens)."
  }
}

variable "machine_type" {
  description = "Machine type; g2-* machines come with L4 GPUs, a2-* with A100s, n1-* take T4/V100 attached."
  type        = string
  default     = "g2-standard-8"
}

variable "gpu_type" {
  description = "Accelerator type, e.g. nvidia-l4, nvidia-tesla-t4, nvidia-tesla-a100."
  type        = string
  default     = "nvidia-l4"
}

variable "gpu_count" {
  description = "Number of GPUs on the VM (run_pipeline.py uses one; see README 'Running on GPUs' for several)."
  type        = number
  default     = 1
  validation {
    condition     = var.gpu_count >= 1
    error_message = "gpu_count must be at least 1."
  }
}

variable "spot" {
  description = "Spot VM: much cheaper, can be preempted; the VM is then stopped and `resume=auto` continues the run when it is started again."
  type        = bool
  default     = true
}

variable "disk_size_gb" {
  description = "Boot disk size in GB: OS and NVIDIA driver, the project's environment from the GPU lock (about 15 GB), models and checkpoints."
  type        = number
  default     = 200
}

variable "image" {
  description = "Boot image: Ubuntu 24.04 LTS (python3 is 3.12; the GPU lock needs Python 3.11-3.13). The startup script installs the NVIDIA driver (nvidia_driver) unless one of branch 580 or newer is already loaded; another image must have that driver, python3 3.11-3.13 with venv, git, make and the Google Cloud CLI."
  type        = string
  default     = "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64"
}

variable "nvidia_driver" {
  description = "Ubuntu NVIDIA driver branch the startup script installs with `ubuntu-drivers install --gpgpu nvidia:<branch>` when the image has no driver >= 580 (the GPU lock's torch 2.11.0 is a CUDA 13.0 build). Use a -open variant (e.g. 580-server-open) on GPUs that need NVIDIA's open kernel modules (Blackwell)."
  type        = string
  default     = "580-server"
  validation {
    condition     = can(regex("^[0-9]{3}(-server)?(-open)?$", var.nvidia_driver)) && try(tonumber(substr(var.nvidia_driver, 0, 3)) >= 580, false)
    error_message = "nvidia_driver must be an Ubuntu driver branch of 580 or newer, such as 580-server or 580-server-open: torch 2.11.0 of requirements/gpu.txt is a CUDA 13.0 build, which needs driver 580+."
  }
}

variable "network" {
  description = "VPC network of the VM."
  type        = string
  default     = "default"
}

variable "subnetwork" {
  description = "Subnetwork of the VM (null: the network's subnetwork in the region)."
  type        = string
  default     = null
}

variable "external_ip" {
  description = "Give the VM an external IP. Off by default: the VM then needs Cloud NAT (or Private Google Access plus a package mirror) to install the project."
  type        = bool
  default     = false
}

variable "repository_url" {
  description = "Git URL of the project (https), cloned on the VM."
  type        = string
  # It reaches the root startup script and `git clone`: https only (git's ext:: and file transports,
  # an option such as --upload-pack=..., and shell characters are refused), no credentials in it.
  validation {
    condition     = can(regex("^https://[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?(/[A-Za-z0-9._~-]+)+/?$", var.repository_url))
    error_message = "repository_url must be a plain https URL such as https://github.com/your-org/rlvr.git: host, optional port, path of letters, digits and . _ ~ - (no user or token, query, quotes, spaces or shell characters)."
  }
}

variable "repository_commit" {
  description = "Commit (full SHA) the VM checks out and runs: pins exactly what ran."
  type        = string
  validation {
    condition     = can(regex("^[0-9a-f]{40}$", var.repository_commit))
    error_message = "repository_commit must be a full 40-character commit SHA."
  }
}

variable "overrides" {
  description = "Hydra overrides of the run, e.g. [\"experiment=gsm_symbolic_qwen_gpu\", \"seed=1\"]. Never put credentials here: they would land in Terraform state."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for o in var.overrides : can(regex("^[A-Za-z0-9_.+~/@=,:\\[\\]{}'\" -]+$", o))])
    error_message = "overrides may hold only Hydra override characters (no newlines, no shell metacharacters such as ; | & $ `)."
  }
}

variable "output_bucket" {
  description = "Name of the GCS bucket this module creates for the run directory (globally unique)."
  type        = string
  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$", var.output_bucket))
    error_message = "output_bucket must be a Cloud Storage bucket name: 3 to 63 lower case letters, digits, and . _ - (it reaches the VM's startup script)."
  }
}

variable "max_run_hours" {
  description = "Auto-shutdown: Compute Engine stops the VM after this many hours of running, whatever the run is doing."
  type        = number
  default     = 12
}

variable "sync_minutes" {
  description = "Minutes between syncs of the run directory to the bucket while the run is going."
  type        = number
  default     = 10
  validation {
    condition     = var.sync_minutes >= 1 && var.sync_minutes <= 1440 && floor(var.sync_minutes) == var.sync_minutes
    error_message = "sync_minutes must be a whole number of minutes from 1 to 1440."
  }
}

variable "wandb_secret_id" {
  description = "Secret Manager secret holding a W&B API key (optional). The VM reads it at run time; the key itself never passes through Terraform."
  type        = string
  default     = ""
  validation {
    condition     = can(regex("^([A-Za-z0-9_-]{1,255})?$", var.wandb_secret_id))
    error_message = "wandb_secret_id must be empty or a Secret Manager secret ID (letters, digits, _ and -, at most 255); it reaches the VM's startup script."
  }
}
