<#
.SYNOPSIS
Removes the ddod Windows service that install-ddod.ps1 installed.

.DESCRIPTION
In order (deploy/windows/README.md):

 1. Stops the service, waits for its process to exit, and deletes the service.
 2. Revokes the user rights SeProfileSingleProcessPrivilege and SeIncreaseQuotaPrivilege from
    NT SERVICE\<name> in the local security policy (secedit, as the install granted them; the
    export before the change is kept in %ProgramData%\DDO-policy-backup).
 3. Removes ddod.exe and ddod.conf from the install directory, and the directory when nothing
    else is left in it.
 4. Keeps the state directory (ddod's manifests and profiles) unless -RemoveState; removes it
    only when its ACL has the entry the install gave NT SERVICE\<name>.
 5. Keeps the local group and its members unless -RemoveGroup.

While the service exists, the install directory, the state directory and the group that are not
given are read from its command line. Running it again when everything is gone changes nothing.

Needs an elevated Windows PowerShell 5.1 (powershell.exe). Not yet run on Windows: there is no
Windows build of ddod yet (docs/windows.md).

.PARAMETER ServiceName
The service to remove. Default: ddod.

.PARAMETER InstallDirectory
Where ddod.exe was installed. Default: read from the service, else $env:ProgramFiles\DDO.

.PARAMETER StateDirectory
ddod's state directory. Default: read from the service (--state-dir), else $env:ProgramData\DDO.

.PARAMETER GroupName
The group of the service's users. Default: read from the service (--socket-group), else
ddo-users.

.PARAMETER RemoveState
Also removes the state directory and everything in it.

.PARAMETER RemoveGroup
Also removes the local group (its members lose nothing else).

.EXAMPLE
Set-ExecutionPolicy -Scope Process Bypass
.\uninstall-ddod.ps1

Removes the service ddod and its files; keeps C:\ProgramData\DDO and the group ddo-users.

.EXAMPLE
.\uninstall-ddod.ps1 -RemoveState -RemoveGroup -WhatIf

Shows what removing everything would do, changing nothing.
#>
#Requires -Version 5.1
[CmdletBinding(SupportsShouldProcess = $true)]
param(
    [ValidatePattern('^[A-Za-z0-9_.-]{1,80}$')]
    [string] $ServiceName = 'ddod',

    [ValidateNotNullOrEmpty()]
    [string] $InstallDirectory = (Join-Path $env:ProgramFiles 'DDO'),

    [ValidateNotNullOrEmpty()]
    [string] $StateDirectory = (Join-Path $env:ProgramData 'DDO'),

    [ValidatePattern('^[^"/\\\[\]:;|=,+*?<>@]{1,256}$')]
    [string] $GroupName = 'ddo-users',

    [switch] $RemoveState,

    [switch] $RemoveGroup
)

Set-StrictMode -Version Latest
$ErrorActionPreference = 'Stop'
Import-Module -Name (Join-Path $PSScriptRoot 'DdoDeploy.psm1') -Force

Assert-DdoAdministrator

$account = "NT SERVICE\$ServiceName"
$serviceSid = Get-DdoServiceSid -ServiceName $ServiceName
$service = Get-DdoServiceInfo -ServiceName $ServiceName
if ($null -ne $service) {
    # The command line install-ddod.ps1 wrote: "<dir>\ddod.exe" --service ... --state-dir "<dir>"
    # --socket-group "<group>" [--config "<file>"].
    $commandLine = $service.PathName
    if (-not $PSBoundParameters.ContainsKey('InstallDirectory') -and
        $commandLine -match '^\s*"([^"]+)"') {
        $InstallDirectory = Split-Path -Path $Matches[1] -Parent
    }
    if (-not $PSBoundParameters.ContainsKey('StateDirectory') -and
        $commandLine -match '--state-dir\s+"([^"]+)"') {
        $StateDirectory = $Matches[1]
    }
    if (-not $PSBoundParameters.ContainsKey('GroupName') -and
        $commandLine -match '--socket-group\s+"([^"]+)"') {
        $GroupName = $Matches[1]
    }
}
$installDir = Resolve-DdoDirectoryPath -Path $InstallDirectory -ParameterName 'InstallDirectory'
$stateDir = Resolve-DdoDirectoryPath -Path $StateDirectory -ParameterName 'StateDirectory'
$stateExists = Test-Path -LiteralPath $stateDir -PathType Container

# Checked before anything changes: -RemoveState deletes a whole tree, so only one the install
# made (its ACL names the service's SID).
if ($RemoveState -and $stateExists -and -not (Test-DdoAclHasSid -Path $stateDir -Sid $serviceSid)) {
    throw ("$stateDir has no ACL entry for $account ($($serviceSid.Value)), so install-ddod.ps1 " +
        'did not make it for this service: nothing was changed. Give -StateDirectory, or remove ' +
        'it by hand.')
}

Write-Host "Removing ddod's Windows service $ServiceName ($account)"

# 1. The service.
if ($null -eq $service) {
    Write-DdoStep "service ${ServiceName}: none"
} else {
    if ($service.State -ne 'Stopped') {
        if ($PSCmdlet.ShouldProcess("service $ServiceName", 'Stop')) {
            Stop-DdoService -ServiceName $ServiceName
            Write-DdoStep "service ${ServiceName}: stopped"
        }
    }
    if ($PSCmdlet.ShouldProcess("service $ServiceName", 'Delete')) {
        Invoke-DdoServiceControl -ArgumentList @('delete', $ServiceName) | Out-Null
        if ($null -ne (Get-DdoServiceInfo -ServiceName $ServiceName)) {
            Write-Warning ("$ServiceName is marked for deletion: it goes once no program holds it " +
                'open (close Services and Event Viewer, or restart Windows).')
        } else {
            Write-DdoStep "service ${ServiceName}: deleted"
        }
    }
}

# 2. The user rights.
$rightsList = $DdoGrantedUserRights -join ', '
if ($PSCmdlet.ShouldProcess('local security policy', "Revoke $rightsList from $account")) {
    $backupDir = Get-DdoPolicyBackupDirectory
    $revoked = @(Update-DdoUserRight -Privilege $DdoGrantedUserRights -Sid $serviceSid `
            -AccountName $account -Action Revoke -BackupDirectory $backupDir)
    if ($revoked.Count -gt 0) {
        Write-DdoStep ("security policy: revoked $($revoked -join ', ') from $account " +
            "(the policy before is in $backupDir)")
    } else {
        Write-DdoStep "security policy: $account holds none of $rightsList"
    }
}

# 3. The installed files.
$installedFiles = @('ddod.exe', 'ddod.conf')
if (Test-Path -LiteralPath $installDir -PathType Container) {
    foreach ($name in $installedFiles) {
        $path = Join-Path $installDir $name
        if ((Test-Path -LiteralPath $path -PathType Leaf) -and
            $PSCmdlet.ShouldProcess($path, 'Remove file')) {
            Remove-Item -LiteralPath $path -Force -Confirm:$false
            Write-DdoStep "removed $path"
        }
    }
    $others = @(Get-ChildItem -LiteralPath $installDir -Force |
            Where-Object { $installedFiles -notcontains $_.Name })
    if ($others.Count -gt 0) {
        Write-DdoStep "kept $installDir (it holds other files: $($others.Name -join ', '))"
    } elseif ($PSCmdlet.ShouldProcess($installDir, 'Remove directory')) {
        Remove-Item -LiteralPath $installDir -Recurse -Force -Confirm:$false
        Write-DdoStep "removed $installDir"
    }
} else {
    Write-DdoStep "${installDir}: none"
}

# 4. The state directory.
if (-not $stateExists) {
    Write-DdoStep "${stateDir}: none"
} elseif ($RemoveState) {
    if ($PSCmdlet.ShouldProcess($stateDir, 'Remove directory and everything in it')) {
        Remove-Item -LiteralPath $stateDir -Recurse -Force -Confirm:$false
        Write-DdoStep "removed $stateDir"
    }
} else {
    Write-DdoStep "kept $stateDir (ddod's manifests and profiles; -RemoveState removes it)"
}

# 5. The group.
$group = Get-LocalGroup -Name $GroupName -ErrorAction SilentlyContinue
if ($null -eq $group) {
    Write-DdoStep "group ${GroupName}: none"
} elseif ($RemoveGroup) {
    if ($PSCmdlet.ShouldProcess("local group $GroupName", 'Remove')) {
        Remove-LocalGroup -Name $GroupName -Confirm:$false
        Write-DdoStep "group ${GroupName}: removed"
    }
} else {
    Write-DdoStep "group ${GroupName}: kept with its members (-RemoveGroup removes it)"
}
