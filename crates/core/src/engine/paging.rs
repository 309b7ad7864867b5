//! How many jobs to ask for in one page of a walk over a slot (the mover's
//! takes, an export's reads). A page is read whole, inside the script and
//! then by the gateway, so it is bounded in bytes as well as in jobs: job
//! bodies may be up to 1 MiB each, and a page of 500 such jobs would hold
//! Redis for the time it takes to copy half a gigabyte.

/// Bytes of job records one page aims at (and `move_out.lua` stops at).
pub const PAGE_BYTES: usize = 8 * 1024 * 1024;

/// The jobs to ask for in each page: the first page asks for a few, and
/// each next one for as many as [`PAGE_BYTES`] holds at the mean record
/// size of the page before, between 1 and the most allowed.
#[derive(Debug, Clone, Copy)]
pub struct PageSize {
    most: u32,
    next: u32,
}

/// Jobs the first page asks for, before any size is known.
const FIRST: u32 = 16;

impl PageSize {
    /// Pages of at most `most` jobs.
    pub fn new(most: u32) -> Self {
        let most = most.max(1);
        Self {
            most,
            next: most.min(FIRST),
        }
    }

    /// Jobs to ask for in the next page.
    pub fn get(&self) -> u32 {
        self.next
    }

    /// A page held `jobs` jobs of `bytes` bytes in all (a page without a
    /// job tells nothing of their size).
    pub fn saw(&mut self, jobs: usize, bytes: usize) {
        if jobs == 0 {
            return;
        }
        let mean = (bytes / jobs).max(1);
        let fit = u32::try_from(PAGE_BYTES / mean).unwrap_or(u32::MAX);
        self.next = fit.clamp(1, self.most);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_hold_about_the_byte_budget_within_the_job_bounds() {
        let mut p = PageSize::new(500);
        assert_eq!(p.get(), 16, "a few, before any size is known");
        // Small jobs: as many as allowed.
        p.saw(16, 16 * 200);
        assert_eq!(p.get(), 500);
        // Jobs of 1 MiB: eight a page.
        p.saw(500, 500 << 20);
        assert_eq!(p.get(), 8);
        // An empty page changes nothing; a job larger than the budget is
        // still read, one a page.
        p.saw(0, 0);
        assert_eq!(p.get(), 8);
        p.saw(1, 2 * PAGE_BYTES);
        assert_eq!(p.get(), 1);
        assert_eq!(PageSize::new(0).get(), 1);
        assert_eq!(PageSize::new(4).get(), 4);
    }
}
