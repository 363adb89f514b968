//! `topology:`: the file each node's place in the fabric is read from (docs/config.md,
//! "Topology"). Only its path is checked here; [`crate::config::Config::load`] reads it.

use std::path::PathBuf;

use serde_saphyr::Spanned;

use super::Ctx;
use crate::config::error::ConfigError;
use crate::config::file::RawTopology;
use crate::config::model::TopologySource;

impl Ctx<'_> {
    pub(super) fn topology(
        &self,
        raw: Option<&Spanned<RawTopology>>,
    ) -> Result<Option<TopologySource>, ConfigError> {
        let Some(raw) = raw else {
            return Ok(None);
        };
        let Some(slurm) = &raw.value.slurm else {
            return Err(self.invalid(
                self.pos(raw),
                "topology",
                "names no file: `topology: {slurm: /etc/slurm/topology.conf}`",
            ));
        };
        let slurm = PathBuf::from(self.non_empty(slurm, "topology.slurm")?);
        Ok(Some(TopologySource { slurm }))
    }
}
