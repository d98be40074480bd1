"""Built-in executors: in this process (`local`), Slurm jobs through submitit (`slurm`), Ray tasks (`ray`)."""
