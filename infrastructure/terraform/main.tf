# One GPU VM that runs one experiment of this project and syncs its run directory to a bucket.
# Nothing here has been applied on a real cloud from this project's machines: it is checked
# statically (python-hcl2, checkov) by tests/static/ (see ../README.md).

locals {
  wandb = var.wandb_secret_id != ""
}

# The VM's own identity: no keys are created or downloaded.
resource "google_service_account" "run" {
  account_id   = substr("${var.name}-sa", 0, 30)
  display_name = "rlvr run ${var.name}"
}

resource "google_storage_bucket" "outputs" {
  # checkov:skip=CKV_GCP_62: access to the bucket is recorded by Cloud Audit Logs; usage logs would need a second bucket for one run's outputs.
  name                        = var.output_bucket
  location                    = var.region
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = false
  versioning {
    enabled = true
  }
}

# Objects only, on this bucket only: create, read, list, overwrite (rsync), nothing on IAM.
resource "google_storage_bucket_iam_member" "run_objects" {
  bucket = google_storage_bucket.outputs.name
  role   = "roles/storage.objectUser"
  member = "serviceAccount:${google_service_account.run.email}"
}

resource "google_project_iam_member" "run_logs" {
  project = var.project_id
  role    = "roles/logging.logWriter"
  member  = "serviceAccount:${google_service_account.run.email}"
}

# Read access to the one W&B secret, when one is named.
resource "google_secret_manager_secret_iam_member" "run_wandb" {
  count     = local.wandb ? 1 : 0
  project   = var.project_id
  secret_id = var.wandb_secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.run.email}"
}

resource "google_compute_instance" "run" {
  name         = var.name
  zone         = var.zone
  machine_type = var.machine_type

  # checkov:skip=CKV_GCP_40: the access_config block exists only when var.external_ip is true (default false: no public IP, reach out through Cloud NAT).
  # checkov:skip=CKV_GCP_38: a customer-supplied key (CSEK) would have to pass through Terraform and sit in its state; the disk uses Google-managed encryption at rest.
  boot_disk {
    initialize_params {
      image = var.image
      size  = var.disk_size_gb
      type  = "pd-balanced"
    }
  }

  guest_accelerator {
    type  = var.gpu_type
    count = var.gpu_count
  }

  scheduling {
    provisioning_model          = var.spot ? "SPOT" : "STANDARD"
    preemptible                 = var.spot
    automatic_restart           = !var.spot
    on_host_maintenance         = "TERMINATE" # required with GPUs
    instance_termination_action = "STOP"      # keep the disk: a restart continues with resume=auto
    max_run_duration {
      seconds = var.max_run_hours * 3600
    }
  }

  network_interface {
    network    = var.network
    subnetwork = var.subnetwork
    dynamic "access_config" {
      for_each = var.external_ip ? [1] : []
      content {}
    }
  }

  shielded_instance_config {
    # Secure Boot off: whether the NVIDIA kernel modules the startup script installs (Ubuntu's
    # prebuilt ones, or DKMS-built where none matches the kernel) load under Secure Boot on this
    # image has not been tried; a driver that does not load would leave the run without its GPU.
    enable_secure_boot          = false
    enable_vtpm                 = true
    enable_integrity_monitoring = true
  }

  service_account {
    email  = google_service_account.run.email
    scopes = ["cloud-platform"] # access is limited by the IAM bindings above, not by scopes
  }

  metadata = {
    block-project-ssh-keys = "true"
    enable-oslogin         = "TRUE"
    serial-port-enable     = "false"
    startup-script         = local.startup_script # startup.tf
  }

  depends_on = [
    google_storage_bucket_iam_member.run_objects,
    google_project_iam_member.run_logs,
    google_secret_manager_secret_iam_member.run_wandb,
  ]
}
